"""A stand-in for tola_plugin/runtime/openvino_backend/worker.py that fails the way broken runtimes do, chosen by the
environment variable FAILING_WORKER: 'segv-on-load' (dies by SIGSEGV when asked to compile), 'hang-on-load' (never
answers), 'error-on-load' (answers with an error), 'killed-on-load' (dies by SIGKILL, as the OOM killer or a user ends
it). Started as the worker is: ``python failing_worker.py READ WRITE``."""
import os
import signal
import sys
import time
from multiprocessing.connection import Connection

reader = Connection(int(sys.argv[1]), writable=False)
writer = Connection(int(sys.argv[2]), readable=False)
mode = os.environ['FAILING_WORKER']
message = reader.recv()
if mode == 'segv-on-load':
    os.kill(os.getpid(), signal.SIGSEGV)
elif mode == 'killed-on-load':
    os.kill(os.getpid(), signal.SIGKILL)
elif mode == 'hang-on-load':
    time.sleep(3600)
else:
    writer.send({'ok': False, 'error': 'RuntimeError: Exception from src/inference/src/cpp/core.cpp: [test] bad IR'})
    reader.recv()
