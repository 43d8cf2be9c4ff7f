"""Stands in for a child whose third-party kernel crashes: dies by SIGSEGV whatever its arguments."""
import os
import signal

os.kill(os.getpid(), signal.SIGSEGV)
