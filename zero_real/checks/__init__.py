"""What is refused before any rank starts: a flag out of its range, while argparse parses it
(flags.py), and what this box or zero_real cannot run, once the flags are read (preflight.py).
Each refusal is one line, exit 2; nothing here starts a process."""
