"""Imported first by the fork server of the ingest workers (expert.ingest._workers.PRELOAD): ignore SIGINT.

A terminal's Ctrl-C goes to the whole process group. The process that started the workers handles it and stops
them; a fork server or worker still importing the readers would otherwise print a KeyboardInterrupt traceback.
The fork server hands the ignored disposition on to every worker it forks."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
