"""The one exception type the data pipeline raises for problems the user can fix."""


class DataError(ValueError):
    """A corpus, split, language or tokenizer cannot be used as configured.

    The message names the offending path, file, count or name and says how to fix it.
    """
