"""``walk.h``'s blocked totals against their definition written out in Python.

A total over every axis of rows shorter than 16 (a conv weight's RMS) adds its rows in
blocks of 16 rows: a block's elements in order, element i into lane i % 16 from +0, the
total's 16 lanes adding the blocks' lanes block after block, then ``lane_tree``. A small
driver walks a (rows, n) domain with ``phases.h``'s own layout and sums (one thread:
running totals; several: partials landed after the walk) and prints the total in
float64; Python's float additions (IEEE double, one at a time) follow the definition.
The data (standard normal draws) make the order show: the rows' order (each row's
partial, then a lane per row) gives other bits, checked too, so the test can fail.
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

// argv: rows, n, serial (1: running totals; 0: partials), the float64 values' file
int main(int argc, char** argv) {
  if (argc != 5) return 2;
  const int64_t rows = std::atoll(argv[1]), n = std::atoll(argv[2]);
  const bool serial = std::atoi(argv[3]) != 0;
  std::vector<double> x(size_t(rows * n));
  FILE* f = std::fopen(argv[4], "rb");
  if (!f || std::fread(x.data(), sizeof(double), x.size(), f) != x.size()) return 3;
  std::fclose(f);
  const uo::Dims dims{1, rows, n};
  const int domain = uo::AR | uo::AC;
  std::vector<uo::Sum> sums{{domain, 0, true}};
  double total = 0.0;
  double* arrays[] = {&total};
  const uo::PhaseLayout L(uo::KERNEL_CHUNK, domain, dims, sums, true);
  if (!L.blocked || L.per_chunk % uo::BLOCK_ROWS != 0) return 4;
  std::vector<uo::Buffer<double>> held;
  held.reserve(1);
  uo::prepare_sums(L, sums, arrays, dims, serial, false, held);
  L.walk_rows<uo::KERNEL_CHUNK>(0, rows, static_cast<double*>(nullptr),
                                [&](const uo::Walk& w, const uo::Chunk& ch, double*) {
                                  uo::row_sums(sums[0], w, ch, x.data() + ch.row * n);
                                });
  uo::land_totals<double>(sums[0], L, dims, 0, L.Db);
  std::printf("%d %a\n", int(sums[0].landing), total);
  return 0;
}
"""


def _lane_tree(lanes: list[float]) -> float:
    width = len(lanes) // 2
    while width:
        for lane in range(width):
            lanes[lane] = lanes[lane] + lanes[lane + width]
        width //= 2
    return lanes[0]


def blocked_total(x: np.ndarray) -> float:
    """The definition (module doc), x of shape (rows, n)."""
    lanes = [0.0] * 16
    for first in range(0, x.shape[0], 16):
        block = [float(v) for v in x[first:first + 16].reshape(-1)]
        part = [0.0] * 16
        for i, value in enumerate(block):
            part[i % 16] = part[i % 16] + value
        for lane in range(16):
            lanes[lane] = lanes[lane] + part[lane]
    return _lane_tree(lanes)


def rows_total(x: np.ndarray) -> float:
    """The rows' order the blocks replaced: a row's lane_sum, rows into lanes by row % 16."""
    lanes = [0.0] * 16
    for row, values in enumerate(x):
        part = [0.0] * 16
        for i, value in enumerate(values):
            part[i] = 0.0 + float(value)
        lanes[row % 16] = lanes[row % 16] + _lane_tree(part)
    return _lane_tree(lanes)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    folder = tmp_path_factory.mktemp("blocked")
    return compiled_driver(folder, DRIVER), folder


@pytest.mark.parametrize("rows, n", [(11029, 3), (1000, 5), (4099, 1), (15, 3)])
def test_a_blocked_total_adds_in_blocks_of_16_rows(driver, rows, n):
    out, folder = driver
    x = np.random.default_rng(rows).standard_normal((rows, n))
    data = folder / f"x_{rows}_{n}.bin"
    data.write_bytes(x.astype("<f8").tobytes())
    expected = blocked_total(x)
    for serial, landing in ((1, "1"), (0, "0")):      # RUNNING, PARTIALS
        done = subprocess.run([str(out), str(rows), str(n), str(serial), str(data)],
                              capture_output=True, text=True)
        assert done.returncode == 0, (done.returncode, done.stderr)
        seen_landing, total = done.stdout.split()
        assert seen_landing == landing
        assert float.fromhex(total) == expected, (rows, n, serial)
    if n > 1 and rows > 16:                   # the data tell the two orders apart
        assert rows_total(x) != expected

