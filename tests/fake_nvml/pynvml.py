"""A fake of nvidia-ml-py's ``pynvml`` module: the functions energyframe calls, with the real
signatures (tests/power/test_nvml.py checks them against the real module), driven by a scenario.

The scenario is a JSON file named by ``FAKE_NVML_SCENARIO`` so that the sampler process (a real
child process in the tests) reads the same one. Per GPU it describes the power over time, the
counter's ticks (synthetic, or a sequence recorded on a real GPU and replayed), and faults:
a counter reset, a lost GPU (both timed from the process's first ``nvmlInit``), no energy
counter (pre-Volta), MIG mode, no permission.
"""

import bisect
import json
import os
import threading
import time
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_TOTAL_POWER_SAMPLES = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

# clock-event reasons (and their deprecated "throttle" names), as nvml.h defines the bits
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlClocksThrottleReasonGpuIdle = nvmlClocksEventReasonGpuIdle
nvmlClocksThrottleReasonApplicationsClocksSetting = nvmlClocksEventReasonApplicationsClocksSetting
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
nvmlClocksThrottleReasonSyncBoost = nvmlClocksEventReasonSyncBoost
nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown
nvmlClocksThrottleReasonDisplayClockSetting = nvmlClocksEventReasonDisplayClockSetting

_NAMES = {
    1: "Uninitialized",
    3: "Not Supported",
    4: "Insufficient Permissions",
    6: "Not Found",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    15: "GPU is lost",
    999: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _NAMES.get(self.value, f"NVML Error with code {self.value}")


# opened: when this process first initialised NVML; faults (lost_after_s, reset_after_s) count
# from there, so that a sampler process that starts slowly still sees them mid-run
_state = SimpleNamespace(scenario=None, initialised=0, opened=None, lock=threading.Lock())


def _scenario():
    if _state.scenario is None:
        with open(os.environ["FAKE_NVML_SCENARIO"]) as f:
            _state.scenario = json.load(f)
    return _state.scenario


class _GPU:
    """Counter ticks at t0 + k*period (or a recorded sequence), energy = integral of power.

    Like the real handles (ctypes pointers), it cannot be copied or pickled."""

    def __reduce_ex__(self, protocol):
        raise ValueError("ctypes objects containing pointers cannot be pickled")

    def __init__(self, index, spec, t0):
        self.index, self.spec, self.t0 = index, spec, t0
        self.period = spec.get("tick_period_s", 0.1)
        self.start_mj = spec.get("counter_start_mj", 2_853_799_000)
        recorded = spec.get("recorded_ticks")  # [[seconds since first tick, mJ since first tick], ...]
        if recorded:
            self.rec_t = [r[0] for r in recorded]
            self.rec_e = [r[1] for r in recorded]
        else:
            self.rec_t = None

    def power_w(self, t):
        profile = self.spec.get("profile")  # [[seconds since t0, watts], ...], piecewise constant
        if not profile:
            return self.spec.get("power_w", 100.0)
        dt = t - self.t0
        value = profile[0][1]
        for start, watts in profile:
            if dt >= start:
                value = watts
        return value

    def energy_j(self, t):
        """Exact energy since t0 for a piecewise-constant profile."""
        profile = self.spec.get("profile")
        if not profile:
            return self.power_w(t) * (t - self.t0)
        total, dt = 0.0, t - self.t0
        for i, (start, watts) in enumerate(profile):
            end = profile[i + 1][0] if i + 1 < len(profile) else float("inf")
            if dt > start:
                total += watts * (min(dt, end) - start)
        return total

    def counter_mj(self, t):
        self.check(t)
        if self.rec_t is not None:
            span = self.rec_t[-1]
            loops, within = divmod(t - self.t0, span) if span > 0 else (0, 0)
            k = bisect.bisect_right(self.rec_t, within) - 1
            value = self.start_mj + loops * self.rec_e[-1] + self.rec_e[max(k, 0)]
        else:
            k = int((t - self.t0) // self.period)
            value = self.start_mj + self.energy_j(self.t0 + k * self.period) * 1e3
        reset = self.spec.get("reset_after_s")
        if reset is not None and t - _state.opened >= reset:
            value -= self.start_mj + self.energy_j(_state.opened + reset) * 1e3
        return int(value)

    def check(self, t):
        lost = self.spec.get("lost_after_s")
        if lost is not None and t - _state.opened >= lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)


def _gpus():
    sc = _scenario()
    t0 = sc["t0_wall"]
    return [_GPU(i, g, t0) for i, g in enumerate(sc["gpus"])]


def nvmlInit():
    sc = _scenario()
    if sc.get("init_error"):
        raise NVMLError(globals()["NVML_ERROR_" + sc["init_error"]])
    with _state.lock:
        _state.initialised += 1
        _state.gpus = _gpus()
        if _state.opened is None:
            _state.opened = time.time()


def nvmlShutdown():
    with _state.lock:
        _state.initialised = max(0, _state.initialised - 1)


def _need_init():
    if not _state.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlSystemGetDriverVersion():
    _need_init()
    return _scenario().get("driver", "580.159.04")


def nvmlDeviceGetCount():
    _need_init()
    return len(_state.gpus)


def nvmlDeviceGetHandleByIndex(index):
    _need_init()
    if not 0 <= index < len(_state.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _state.gpus[index]


def nvmlDeviceGetHandleByUUID(uuid):
    _need_init()
    for gpu in _state.gpus:
        if gpu.spec["uuid"] == uuid or uuid in gpu.spec.get("mig_uuids", []):
            return gpu
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice):
    return migDevice


def nvmlDeviceGetUUID(handle):
    return handle.spec["uuid"]


def nvmlDeviceGetName(handle):
    return handle.spec.get("name", "NVIDIA H200")


def _value(kind, number):
    return SimpleNamespace(
        dVal=float(number),
        uiVal=int(number),
        ulVal=int(number),
        ullVal=int(number),
        sllVal=int(number),
        siVal=int(number),
        usVal=int(number),
    )


def _starve(handle, now):
    """How long a host short of CPU keeps the poller away after this read (``starve``: the
    read just before every ``every``-th tick, ``lead_s`` or less before it, is followed by
    ``stall_s`` without a poll; each starved tick is logged to ``log``, seconds since t0)."""
    starve = handle.spec.get("starve")
    if not starve or handle.rec_t is not None:
        return 0.0
    k = int((now - handle.t0) // handle.period) + 1  # the next tick
    due = handle.t0 + k * handle.period - now
    if k % starve["every"] or due > starve.get("lead_s", 0.004) or getattr(handle, "starved_tick", None) == k:
        return 0.0
    handle.starved_tick = k
    if starve.get("log"):
        with open(starve["log"], "a") as f:
            f.write(f"{k * handle.period!r}\n")
    return starve["stall_s"]


def nvmlDeviceGetFieldValues(handle, fieldIds):
    # as on an H100: the values are read as the call begins, then the call takes its time, and
    # a call that sees a new counter value may block for longer (``field_stall_s``); a starved
    # poller comes back late (``starve``)
    now = time.time()
    cost = handle.spec.get("field_cost_s", 0.001)
    try:
        out = _field_values(handle, fieldIds, now)
    except NVMLError:
        time.sleep(cost)
        raise
    counter = [v.value.ullVal for v in out if v.fieldId == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION and v.nvmlReturn == NVML_SUCCESS]
    stall = 0.0
    if counter:
        if getattr(handle, "last_read_mj", counter[0]) != counter[0]:
            stall = handle.spec.get("field_stall_s", 0.0)
        handle.last_read_mj = counter[0]
        stall += _starve(handle, now)
    time.sleep(cost + stall)
    return out


def _field_values(handle, fieldIds, now):
    handle.check(now)
    if _scenario().get("field_permission_error"):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    out = []
    for fid in fieldIds:
        ret, kind, number = NVML_SUCCESS, NVML_VALUE_TYPE_UNSIGNED_INT, 0
        if fid == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            if handle.spec.get("no_counter"):
                ret = NVML_ERROR_NOT_SUPPORTED
            else:
                kind, number = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, handle.counter_mj(now)
        elif fid == NVML_FI_DEV_POWER_INSTANT:
            if handle.spec.get("no_instant"):
                ret = NVML_ERROR_NOT_SUPPORTED
            else:
                tick = handle.t0 + ((now - handle.t0) // 0.1) * 0.1
                number = int(handle.power_w(tick) * 1e3)
        elif fid == NVML_FI_DEV_POWER_AVERAGE:
            number = int(handle.energy_j(now) - handle.energy_j(now - 1.0)) * 1000
        else:
            ret = NVML_ERROR_NOT_SUPPORTED
        out.append(
            SimpleNamespace(
                fieldId=fid,
                scopeId=0,
                timestamp=int(now * 1e6),
                latencyUsec=0,
                valueType=kind,
                nvmlReturn=ret,
                value=_value(kind, number),
            )
        )
    return out


def nvmlDeviceGetSamples(device, sampling_type, timeStamp):
    now = time.time()
    device.check(now)
    period = 0.02
    first = max(device.t0, now - 119 * period)
    k0 = int((first - device.t0) // period) + 1
    samples = []
    k = k0
    while device.t0 + k * period <= now:
        t = device.t0 + k * period
        stamp = int(t * 1e6)
        if stamp > timeStamp:
            samples.append(
                SimpleNamespace(timeStamp=stamp, sampleValue=_value(1, int(device.power_w(t) * 1e3)))
            )
        k += 1
    if not samples:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return (NVML_VALUE_TYPE_UNSIGNED_INT, samples)


def nvmlDeviceGetClockInfo(handle, type):
    handle.check(time.time())
    return handle.spec.get("sm_clock_mhz", 1980) if type == NVML_CLOCK_SM else 3201


def nvmlDeviceGetTemperature(handle, sensor):
    return handle.spec.get("temperature_c", 45)


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return handle.spec.get("clock_events", 0)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return handle.spec.get("clock_events", 0)


def nvmlDeviceGetMigMode(device):
    mig = 1 if device.spec.get("mig") else 0
    return [mig, mig]


def nvmlDeviceGetPowerManagementLimit(handle):
    return int(handle.spec.get("power_limit_w", 700) * 1000)


def nvmlDeviceGetPowerUsage(handle):
    return int(handle.power_w(time.time()) * 1e3)
