"""Generated flag tables of the engines (see engines/flags.py); data only."""
