from pigeond.main import entry

entry()
