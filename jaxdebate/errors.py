"""Exceptions with messages a researcher can act on: each names the file, field or tensor at fault."""


class JaxDebateError(Exception):
    """Base class for every error jaxdebate raises on purpose."""


class ConfigError(JaxDebateError, ValueError):
    """An invalid configuration value, raised when the config is built (before any compute)."""


class WeightsError(JaxDebateError):
    """Model weights or a model config that cannot be loaded, exported or matched to the architecture."""


class DataError(JaxDebateError, ValueError):
    """A dataset source that is missing, empty or malformed (the message names file and line)."""


class SamplerError(JaxDebateError, RuntimeError):
    """A sampling backend that failed (server died, bad response, invalid request)."""


class RunError(JaxDebateError):
    """A run that cannot start as asked (its workdir is in use, or its config differs from the one its
    checkpoints were trained with); the launcher exits 2 with the message."""
