"""Error types raised on bad user input (files, configs). All are ``ValueError``s."""


class WhaleError(ValueError):
    """Base class: the message says what was expected, what was received, and where."""


class DataError(WhaleError):
    """A data file or image is missing, malformed, or unsafe."""


class ConfigError(WhaleError):
    """A configuration file has an unknown key or a bad value."""
