"""OpenVINO's telemetry kept off in the two processes that load OpenVINO (``worker.py``, ``convert.py``; standard
library only). ``import openvino`` imports its converter, whose telemetry counts a missing consent file as consent:
it writes a client id and counters under ``~/intel/`` and posts usage events to Google Analytics from forked
processes (3 s each where there is no network). With its package absent from ``sys.modules`` the converter uses its
own stub: nothing is written or sent. Only in those children: the user's process keeps its modules as they are."""
import sys


def block_openvino_telemetry() -> None:
    """Make ``import openvino_telemetry`` fail in this process (before OpenVINO is imported)."""
    sys.modules['openvino_telemetry'] = None
