"""The running daemon: the entry point (main), the wiring of every layer (daemon),
systemd's protocols, listeners, logs, limits, and the periodic housekeeping jobs."""
