"""The CPU fingerprint in results.json (lra.hardware): what it records, with and without
/proc/cpuinfo, and when a rerun must repeat a stored run exactly."""
import pytest

from lra import hardware

X86 = """processor\t: 0
model name\t: Some Xeon(R) CPU
flags\t\t: fpu sse2 fma avx avx2 avx512f avx512bw amx_bf16 amx_tile
bugs\t\t: spectre_v1

processor\t: 1
model name\t: Some Xeon(R) CPU
flags\t\t: fpu sse2 fma avx avx2 avx512f avx512bw amx_bf16 amx_tile
"""
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm sve\n"


def _cpuinfo(monkeypatch, tmp_path, text):
  path = tmp_path / "cpuinfo"
  if text is not None:
    path.write_text(text)
  monkeypatch.setattr(hardware, "CPUINFO", str(path))


def test_this_machine_has_a_model_and_a_fingerprint():
  cpu = hardware.describe_cpu()
  assert set(cpu) == {"cpu_model", "cpu_features"}
  assert all(isinstance(v, str) and v for v in cpu.values())


@pytest.mark.parametrize("text, model, features", [
    (X86, "Some Xeon(R) CPU", "fma+avx2+avx512f+amx_tile"),
    (ARM, None, "asimd+sve"),  # no model name on ARM: platform.processor()
    ("model name\t: Old CPU\nflags\t\t: fpu sse2\n", "Old CPU", "none"),
])
def test_the_fingerprint_reads_the_flags(monkeypatch, tmp_path, text, model, features):
  monkeypatch.setattr(hardware.platform, "processor", lambda: "aarch64")
  _cpuinfo(monkeypatch, tmp_path, text)
  assert hardware.describe_cpu() == {"cpu_model": model or "aarch64", "cpu_features": features}


@pytest.mark.parametrize("processor", ["arm", ""])
def test_no_cpuinfo_is_not_an_error(monkeypatch, tmp_path, processor):
  _cpuinfo(monkeypatch, tmp_path, None)  # macOS, Windows: no /proc/cpuinfo
  monkeypatch.setattr(hardware.platform, "processor", lambda: processor)
  assert hardware.describe_cpu() == {"cpu_model": processor or hardware.UNKNOWN,
                                     "cpu_features": hardware.UNKNOWN}


CPU = {"platform": "cpu", "device_kind": "cpu"}


@pytest.mark.parametrize("stored, current, exact, why", [
    ({**CPU, "cpu_features": "fma+avx2"}, {**CPU, "cpu_features": "fma+avx2"}, True,
     "the same CPU family (fma+avx2)"),
    ({**CPU, "cpu_features": "fma+avx2"}, {**CPU, "cpu_features": "fma+avx2+avx512f"}, False,
     "another CPU family: stored on fma+avx2, rerun on fma+avx2+avx512f"),
    (CPU, {**CPU, "cpu_features": "fma+avx2"}, False,  # a record from before the fingerprint
     "the stored run's CPU family is unknown (recorded before cpu_features)"),
    ({**CPU, "cpu_features": "fma+avx2"}, {**CPU, "cpu_features": "unknown"}, False,
     "this machine's CPU family is unknown"),
    ({**CPU, "cpu_features": "fma"}, {"platform": "gpu", "cpu_features": "fma"}, False,
     "not both on CPU (stored on 'cpu', rerun on 'gpu')"),
])
def test_exact_only_on_the_same_known_cpu_family(stored, current, exact, why):
  assert hardware.repeats_exactly(stored, current) == (exact, why)


def test_results_record_the_cpu():
  from lra.training import run_record  # JAX: only this test
  described = run_record.describe_hardware()
  assert hardware.describe_cpu().items() <= described.items()
  assert described["gpu_model"] is None  # the tests run on CPU
