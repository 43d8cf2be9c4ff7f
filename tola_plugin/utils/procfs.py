"""The one reader of Linux's ``/proc`` and the one test of whether a PID is alive (``make lint``: OWN008): a process's
``stat`` fields, ``status`` sizes and memory mappings, the processes there are, the machine's free memory and CPU, the
NVIDIA driver's version. Standard library only (the OpenVINO worker imports it through ``runtime/resident_memory``).
Where there is no ``/proc`` (not Linux), each says so by its return value."""
import os
import re
from typing import Dict, List, Optional, Tuple, Union

PROC = '/proc'
NVIDIA_DRIVER_FILE = '/proc/driver/nvidia/version'
Pid = Union[int, str]  # a process ID, or 'self'


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0: one of another user's counts, a zombie too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def pids() -> List[int]:
    """The IDs of every process ``/proc`` lists now."""
    return [int(entry) for entry in os.listdir(PROC) if entry.isdigit()]


def stat_fields(pid: Pid = 'self') -> Optional[List[str]]:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)``: [0] the state ('R', 'S', 'Z', ...), [1] the parent's
    PID, [11] utime and [12] stime in clock ticks, [19] the start time in clock ticks since boot (proc(5), minus 3);
    None when the process is gone or there is no ``/proc``."""
    try:
        with open(f'{PROC}/{pid}/stat', encoding='ascii', errors='replace') as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(')') + 2:].split()  # the name may hold spaces and parentheses: after its last ')'


def status_bytes(field: str, pid: Pid = 'self') -> int:
    """A size field of ``/proc/<pid>/status`` in bytes: 'VmHWM' (peak resident set of the process image; unlike
    getrusage's ru_maxrss, which Linux carries over from the parent through fork and exec) or 'VmRSS'. OSError when
    the file or the field is absent."""
    with open(f'{PROC}/{pid}/status', encoding='ascii') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1]) * 1024
    raise OSError(f'{PROC}/{pid}/status has no {field}')


def mappings(pid: Pid = 'self') -> List[Tuple[int, int, str, str]]:
    """A process's memory mappings (``/proc/<pid>/maps``): (start, end, permissions, path; '' for anonymous memory);
    [] where there is no ``/proc`` (not Linux)."""
    found = []
    try:
        with open(f'{PROC}/{pid}/maps', encoding='utf-8', errors='surrogateescape') as f:
            for line in f:
                fields = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in fields[0].split('-'))
                found.append((start, end, fields[1], fields[5].rstrip('\n') if len(fields) == 6 else ''))
    except FileNotFoundError:
        return []
    return found


def meminfo_bytes(field: str = 'MemAvailable') -> Optional[int]:
    """A field of ``/proc/meminfo`` in bytes; None when it or the file is absent."""
    try:
        with open(f'{PROC}/meminfo', encoding='ascii') as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cpuinfo() -> Optional[Dict[str, str]]:
    """The first processor's fields of ``/proc/cpuinfo`` ('model name', 'flags', 'cpu family', ...); None where there
    is no such file."""
    fields = {}
    try:
        with open(f'{PROC}/cpuinfo', encoding='utf-8', errors='replace') as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(':')
                fields[key.strip()] = value.strip()
    except OSError:
        return None
    return fields


def cpu_flags() -> frozenset:
    """This CPU's flags (``cpuinfo``'s 'flags'; empty where there is none)."""
    return frozenset((cpuinfo() or {}).get('flags', '').split())


def nvidia_driver_version(path: str = NVIDIA_DRIVER_FILE) -> Optional[str]:
    """The loaded NVIDIA kernel driver's version ('535.104.05'), or None when no NVIDIA driver is loaded."""
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            text = f.read()
    except OSError:
        return None
    match = re.search(r'Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)', text)
    return match.group(1) if match else 'unknown version'
