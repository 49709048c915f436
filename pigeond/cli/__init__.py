"""The command-line tools: ``pigeon`` (operators), ``pigeon-send`` (senders) and the
plugin installer.  They read the database and talk HTTP with the standard library only:
no Twisted web client, so they start fast."""
