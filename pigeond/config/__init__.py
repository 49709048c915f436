"""pigeond's settings: every option declared once (:mod:`.options`), checked
(:mod:`.checks`), and read from flags, environment and file (:mod:`.sources`); the
system service's places (:mod:`.system`)."""

from pigeond.config.checks import ConfigError
from pigeond.config.options import (
    DEFAULTS,
    OPTION_BY_NAME,
    OPTIONS,
    Config,
    Option,
    default_daemon_name,
    default_db_path,
    default_runtime_socket,
    default_token_path,
)
from pigeond.config.sources import find_config_file, load_config, read_config_file
from pigeond.config.system import SERVICE_ENVIRONMENT, SYSTEM_CONFIG_FILE, SYSTEM_DB

__all__ = [
    "DEFAULTS",
    "OPTIONS",
    "OPTION_BY_NAME",
    "SERVICE_ENVIRONMENT",
    "SYSTEM_CONFIG_FILE",
    "SYSTEM_DB",
    "Config",
    "ConfigError",
    "Option",
    "default_daemon_name",
    "default_db_path",
    "default_runtime_socket",
    "default_token_path",
    "find_config_file",
    "load_config",
    "read_config_file",
]
