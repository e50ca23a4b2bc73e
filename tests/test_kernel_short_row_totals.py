"""``walk.h``'s vector totals of short rows against their definition written out in Python.

A conv weight's factored moments sum rows of 3 (over C) and the 3 rows of each kernel
position (over R, each b one group), in double, each total rounded once to float32.
``rows_and_columns`` (a 3x3 b's row and column totals from one conversion) and
``groups_in_vectors`` (column totals of 3x3 b's, and of b's of 3 rows of 1) compute
them in AVX2 vectors. Their definition (``short_sum`` and ``group_totals``):

- a row's total: ``float32(0 + ((0 + x0) + (0 + x2)) + (0 + x1))``;
- a column's total: ``float32(0 + ((0 + x0) + x1) + x2)`` (x0, x1, x2 down the rows).

The vector forms leave out zero-adds that can change only the sign of a zero, which
the total's last ``0 +`` makes +0. A small driver, compiled for this CPU as the kernels
are, walks a (B, 3, 3) or (B, 3, 1) domain with ``phases.h``'s own layout and landings
and writes the totals; the data hold -0, +0, infinities, NaNs, subnormal and huge
values, and magnitudes far apart (where the order of the double additions shows).
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from support import compiled_driver

from unified_opt.kernels import build

try:
    build._compiler()
except build.KernelUnavailable as error:
    pytest.skip(f"no C++ compiler here: {error}", allow_module_level=True)

DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "phases.h"

// argv: B, C (3 or 1), what (0: rows_and_columns, 1: column_sums alone), the float32
// values' file, the totals' file (rows' totals then columns')
int main(int argc, char** argv) {
#if !defined(__AVX2__)
  return 5;
#endif
  if (argc != 6) return 2;
  const int64_t B = std::atoll(argv[1]), C = std::atoll(argv[2]);
  const int what = std::atoi(argv[3]);
  std::vector<float> x(size_t(B * 3 * C));
  FILE* f = std::fopen(argv[4], "rb");
  if (!f || std::fread(x.data(), sizeof(float), x.size(), f) != x.size()) return 3;
  std::fclose(f);
  const uo::Dims dims{B, 3, C};
  const int domain = uo::AB | uo::AR | uo::AC;
  std::vector<float> rows_out(size_t(B * 3), -1.0f), columns_out(size_t(B * C), -1.0f);
  float* arrays[] = {nullptr, rows_out.data(), columns_out.data()};
  std::vector<uo::Sum> sums;
  if (what == 0) sums.push_back({uo::AC, 1, true});
  sums.push_back({uo::AR, 2, true});
  const uo::PhaseLayout L(uo::KERNEL_CHUNK, domain, dims, sums, true);
  std::vector<uo::Buffer<double>> held;
  held.reserve(sums.size());
  uo::prepare_sums(L, sums, arrays, dims, true, false, held);
  const uo::Sum& columns = sums.back();
  if (columns.landing != uo::Landing::GROUPS) return 4;
  if (what == 0 && sums[0].landing != uo::Landing::ROWS) return 4;
  std::vector<float> scratch(size_t(4 * uo::KERNEL_CHUNK));
  L.walk_rows<uo::KERNEL_CHUNK>(0, B * 3, scratch.data(),
                                [&](const uo::Walk& w, const uo::Chunk& ch, float*) {
                                  const float* v = x.data() + ch.row * C;
                                  if (what == 0) uo::rows_and_columns(sums[0], columns, w, ch, v);
                                  else uo::column_sums(columns, w, ch, v);
                                });
  FILE* o = std::fopen(argv[5], "wb");
  if (!o) return 3;
  std::fwrite(rows_out.data(), sizeof(float), rows_out.size(), o);
  std::fwrite(columns_out.data(), sizeof(float), columns_out.size(), o);
  std::fclose(o);
  return 0;
}
"""


def row_total(x0: float, x1: float, x2: float) -> np.float32:
    """``short_sum<3>`` then the landing's ``0 +``: Python's float additions are IEEE
    double, one at a time; numpy rounds the double to float32 to nearest."""
    lane0, lane1, lane2 = 0.0 + float(x0), 0.0 + float(x1), 0.0 + float(x2)
    return _rounded(0.0 + ((lane0 + lane2) + lane1))


def column_total(x0: float, x1: float, x2: float) -> np.float32:
    """``group_totals``: a partial from 0 down the rows in order, then ``0 +``."""
    return _rounded(0.0 + (((0.0 + float(x0)) + float(x1)) + float(x2)))


def _rounded(total: float) -> np.float32:
    """A double total rounded to float32 (to nearest; beyond its range, infinite)."""
    with np.errstate(over="ignore"):
        return np.float32(total)


#: where a triple of a total lies: its first place's step between b's and within a b,
#: the step between its places
TRIPLES = {"rows": (9, 3, 1), "columns": (9, 1, 3), "ones": (3, 0, 1)}


def _values(count: int, seed: int, triples: str) -> np.ndarray:
    """float32 values over many magnitudes, with every special value among them, whole
    b's of zeros of both signs, and totals' triples (a, -a, t) in some order, t far below
    a (``triples``: the rows' or columns' of 3x3 b's, or b's of 3 rows of 1): where the
    double additions' order shows, (a + t) - a being 0 and (a - a) + t being t."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(count) * 10.0 ** rng.integers(-40, 38, count)
    specials = [-0.0, 0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1.0]
    places = rng.integers(0, count, count // 4)
    x[places] = rng.choice(specials, places.size)
    for start in rng.integers(0, count // 9, count // 90) * 9:
        x[start:start + 9] = rng.choice([-0.0, 0.0], 9)
    per_b, within, step = TRIPLES[triples]
    bs = count // per_b
    for b in rng.integers(0, bs, bs // 3):
        a = rng.standard_normal() * 10.0 ** rng.integers(-10, 10)
        start = b * per_b + within * rng.integers(0, 3)
        x[start + step * np.arange(3)] = rng.permutation(
            [a, -a, a * 10.0 ** -rng.integers(17, 25)])
    return x.astype(np.float32)


def _same(found: np.ndarray, expected: list) -> bool:
    """Bit for bit, NaNs as NaNs (their payloads are the CPU's)."""
    expected = np.asarray(expected, dtype=np.float32)
    nan = np.isnan(expected)
    return bool(np.array_equal(np.isnan(found), nan) and
                np.array_equal(found[~nan].view(np.uint32), expected[~nan].view(np.uint32)))


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    folder = tmp_path_factory.mktemp("short_rows")
    return compiled_driver(folder, DRIVER, native=True), folder


def _run(driver, B: int, C: int, what: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out, folder = driver
    data, totals = folder / f"x_{B}_{C}_{what}.bin", folder / f"t_{B}_{C}_{what}.bin"
    data.write_bytes(x.astype("<f4").tobytes())
    done = subprocess.run([str(out), str(B), str(C), str(what), str(data), str(totals)],
                          capture_output=True, text=True)
    if done.returncode == 5:
        pytest.skip("this CPU has no AVX2: the vector totals are not compiled")
    assert done.returncode == 0, (done.returncode, done.stderr)
    found = np.frombuffer(totals.read_bytes(), dtype="<f4")
    return found[:B * 3], found[B * 3:]


@pytest.mark.parametrize("B", [1, 2, 5, 113, 114, 1000])
def test_a_3x3_kernels_row_and_column_totals_follow_their_definition(driver, B):
    """rows_and_columns (both totals) and column_sums alone (groups_in_vectors), over
    chunks of whole b's (113 to a chunk: the chunk's last b goes element by element)."""
    x = _values(B * 9, B, "rows" if B % 2 else "columns")
    rows, columns = _run(driver, B, 3, 0, x)
    v = x.astype(np.float64).reshape(B, 3, 3)
    assert _same(rows, [row_total(*v[b, r]) for b in range(B) for r in range(3)])
    expected_columns = [column_total(*v[b, :, c]) for b in range(B) for c in range(3)]
    assert _same(columns, expected_columns)
    _, alone = _run(driver, B, 3, 1, x)
    assert _same(alone, expected_columns)


@pytest.mark.parametrize("B", [1, 4, 7, 341, 342, 2000])
def test_column_totals_of_b_s_of_three_rows_of_one_follow_their_definition(driver, B):
    """groups_in_vectors on rows of 1 (a factored moment's row values summed over a 3x3
    kernel position's rows), four b's at a time."""
    x = _values(B * 3, B + 1, "ones")
    _, columns = _run(driver, B, 1, 1, x)
    v = x.astype(np.float64).reshape(B, 3)
    assert _same(columns, [column_total(*v[b]) for b in range(B)])


def test_the_data_tell_the_orders_apart():
    """The values above are such that another order of the double additions gives other
    float32 totals (so the comparisons can fail)."""
    v = _values(9000, 7, "rows").astype(np.float64).reshape(-1, 3)
    finite = np.isfinite(v).all(axis=1)
    other = [_rounded(0.0 + ((float(a) + float(b)) + float(c))) for a, b, c in v[finite]]
    defined = [row_total(a, b, c) for a, b, c in v[finite]]
    assert sum(o != d for o, d in zip(other, defined)) > 0
