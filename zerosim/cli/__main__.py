import sys

from zerosim.cli import main

sys.exit(main())
