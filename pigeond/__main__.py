from pigeond.service.main import entry

entry()
