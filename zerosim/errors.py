"""The one exception type for bad user input: the CLI turns it into one line and exit code 2."""


class InputError(ValueError):
    """A scenario, override, or companion file that cannot be used as given.

    The message is a complete sentence for a person: it names the file or key and, where a value is
    impossible, shows the arithmetic that rules it out.
    """


def brief(value, render=repr) -> str:
    """A user's value as an error quotes it: rendered (repr, or json.dumps for a JSON file's
    value) on one line, cut to 40 characters."""
    text = render(value)
    return text if len(text) <= 40 else text[:37] + "..."
