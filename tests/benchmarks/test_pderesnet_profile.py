"""benchmarks/pderesnet_profile: the report is its record's data rendered, and the families are the modules'."""

from __future__ import annotations

from benchmarks.pderesnet_profile import pderesnet_profile as pp
from benchmarks.records import read_record, report_of
from torch import nn

from pdevision.layers.hyperbolic import BoundedActivation, DerivativeConv


def test_the_report_is_the_records_data_rendered() -> None:
    record = read_record(pp.RECORD)
    assert pp.render(record["data"]) == report_of(record) == pp.OUT.read_text()


def test_each_table_row_recomputes_from_the_data() -> None:
    data = read_record(pp.RECORD)["data"]
    for key, timings in data["timings"].items():
        batch = int(key[1:])
        for dtype in data["settings"]["dtypes"]:
            t = timings[f"{pp.MODEL} {dtype}"]
            share = 2 * data["macs"][pp.MODEL]["total"] * batch / t["median"] / 1e9 / pp.rate(data, dtype)
            row = next(r for r in pp.whole_table(data) if r.startswith(f"| {batch} | {dtype} | {pp.MODEL} |"))
            assert f"| {100 * share:.0f}% |" in row
            rows = pp.family_rows(data, batch, dtype, pp.MODEL)
            assert abs(sum(rows[f]["ms"] for f in pp.FAMILIES) - rows["total"]["ms"]) < 1e-9
    for arm in pp.ARMS:  # every multiply-add of the counter falls in a family
        macs = data["macs"][arm]
        assert abs(sum(macs[f] for f in pp.FAMILIES) - macs["total"]) <= 1e-9 * macs["total"]


def test_modules_fall_in_their_families() -> None:
    assert pp.module_family(DerivativeConv(8, 4, 4)) == pp.F_DERIV
    assert pp.module_family(nn.Conv2d(8, 8, 1)) == pp.F_1X1
    assert pp.module_family(nn.Conv2d(8, 8, 3, groups=8)) == pp.F_DERIV
    assert pp.module_family(nn.Conv2d(8, 8, 3)) == pp.F_DENSE
    assert pp.module_family(nn.Conv2d(3, 8, 7)) == pp.F_STEM
    assert pp.module_family(BoundedActivation("softball")) == pp.F_ACT
    assert pp.module_family(nn.Linear(8, 2)) == pp.F_HEAD
    assert pp.module_family(nn.Sequential()) is None
