"""A seeded Pathfinder generator: are the two dots joined by one dashed path?

The task of Linsley et al. (NeurIPS 2018, "Learning long-range spatial dependencies with horizontal gated
recurrent units"), which Long Range Arena (Tay et al., ICLR 2021) uses as Pathfinder (32 px) and Path-X
(128 px). This module is written from those papers' description; it is not the authors' generator, and it makes
its own choices where the description leaves them open (``docs/pathfinder.md`` lists them).

An image is black with white dashed paths. Two *target* paths of ``n_dashes`` dashes start ``seed_distance``
apart and grow dash by dash in turn; then ``n_distractors`` paths of ``distractor_dashes`` dashes are grown one
after the other, each left out where it finds no room. Two dots (discs of ``dot_radius``) are drawn: on the start
and the end of one target path in a positive image (label 1), on the start of one target path and the end of the
other in a negative (label 0). Images come in pairs, a negative and a positive whose dots are the same distance
apart (to within :data:`DOT_BIN`), and no two dots closer than two radii and the separation (nor than
``dot_distance``): the dots' distance has one distribution in both classes (version 1 drew it apart by label: it
gave the label 58-60% of the time). The two target drawings of a pair are placed together: each turned rigidly
about its first dot so that its dots point along one direction (the first of a few drawn that fits; with
``isotropic``, one uniform direction, the pair kept only where it fits the image in every direction, so that the
direction does not depend on the drawing, where the first that fits does), then one translation, uniform among
those that keep both inside the image, puts both first dots at one point; so the dots of a pair sit at the same
places (to within the bin), and neither their places nor their offsets carry the label (version 2 shifted each
drawing into the image on its own, so the room left, and the dots' places, depended on the path's extent: a
classifier on the dots' geometry reached 53.6%).

A path is a walk of dashes: dash ``j`` runs ``dash_length`` from ``p_j`` in the direction ``theta_j``; dash
``j + 1`` starts ``dash_gap`` after its end, with ``theta_{j+1} = theta_j + U(-max_turn, max_turn)``. Each dash is
drawn up to ``tries`` times (new turns) until it lies inside the image, more than ``separation`` from every other
path (and from the targets' end dots); a target pair that gets stuck is drawn again from its start, and so is
one where a path comes back within ``separation`` of one of its own end dots (beyond the dash next to it). A
path may otherwise come close to itself. Geometry is computed in the coordinates of a 32-px image (points every
``STEP`` along each dash, checked on a grid of ``CELL`` px) and then drawn at ``size``: the images of one seed at
two sizes are the same drawing at two resolutions.

Rendering is binary (0 or 255, one channel), without anti-aliasing: a dash is the pixels that points sampled at
most half a pixel apart along it fall in, thickened to ``thickness`` (scaled) pixels. The dashes of one path are
at Chebyshev distance at most :meth:`PathfinderConfig.gap_px` pixels from the next, and different paths more
than that, so a flood fill that bridges gaps of ``gap_px`` joins exactly the dashes of each path.

Images come in blocks of :data:`BLOCK`: block ``b`` of a split is generated, vectorised over its images, from
``numpy.random.default_rng([seed, split, b, VERSION])``, so image ``i`` does not depend on how many are asked
for, and the train, validation and test splits (streams 0, 1, 2) are independent. Image ``i`` is positive when
``i`` is odd (images ``2j`` and ``2j + 1`` are a pair): a split of even length is exactly balanced.
"""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields

import numpy as np

from pdevision._values import is_finite_scalar, is_integer_scalar

VERSION = 4  # 4: a target path keeps clear of its own dots; 3: a pair placed jointly, its dots at one place (2: one
# dot distance; 1: the distance differed by label). The knobs dot_distance and isotropic came later; at their
# defaults the images are version 4's
BLOCK = 256
REFERENCE_SIZE = 32  # the lengths of PathfinderConfig are pixels of an image of this side
CELL = 1.0  # side of the grid cells, in reference pixels, on which the distances between paths are checked
STEP = 0.5  # spacing of the points sampled along a dash for those checks, in reference pixels
SPLITS = {"train": 0, "val": 1, "test": 2}
MAX_ROUNDS = 100  # rounds of drawing the target pairs that got stuck before giving up
MAX_PATHS = 64  # one bit of a uint64 per path in the occupancy grid
DOT_BIN = 0.25  # reference pixels: a positive and its negative have dot distances in one bin this wide
PLACE_TRIES = 8  # directions tried for placing a negative and its positive together (unless isotropic)


@dataclass(frozen=True)
class PathfinderConfig:
    """Knobs of :func:`make_pathfinder`; lengths in pixels of a 32-px image, drawn scaled by ``size / 32``."""

    size: int = 32
    n_dashes: int = 14  # dashes of each target path (the contour length)
    n_distractors: int = 8  # distractor paths asked for (fewer are drawn where they do not fit)
    distractor_dashes: int = 4
    dash_length: float = 1.0
    dash_gap: float = 1.5
    thickness: float = 1.0
    dot_radius: float = 1.2
    max_turn: float = 60.0  # degrees, the largest change of direction from one dash to the next
    separation: float = 2.0  # least distance between two paths (and between a path and the targets' dots)
    seed_distance: float = 7.0  # distance between the starts of the two target paths
    tries: int = 16  # draws of each dash before the path is given up
    dot_distance: float = 0.0  # least distance between the two dots' centres; 0: two radii and the separation
    isotropic: bool = False  # each pair turned to a uniform direction, kept where it fits every one (short paths)

    @property
    def scale(self) -> float:
        return self.size / REFERENCE_SIZE

    @property
    def width_px(self) -> int:
        return max(1, round(self.thickness * self.scale))

    @property
    def gap_px(self) -> int:
        """The largest Chebyshev distance, in pixels at ``size``, from a dash's pixels to the next dash's."""
        return math.floor(self.dash_gap * self.scale) + 1

    def check(self) -> None:
        """Refuse (``ValueError``, one line) knobs the generator cannot honour: counts that are not integers in their
        range, lengths that are not finite numbers within the 32-px reference image, and drawings that cannot keep
        their paths apart (NaN, infinite or huge values ran into numpy's errors, terabyte allocations or hours)."""
        for name, low, high in _COUNTS:
            value = getattr(self, name)
            if not (is_integer_scalar(value) and low <= value <= high):
                raise ValueError(f"pathfinder {name} must be an integer from {low} to {high}, got {value!r:.40}")
        for name, low in _LENGTHS:
            value = getattr(self, name)
            if not (is_finite_scalar(value) and low < value <= REFERENCE_SIZE):
                raise ValueError(
                    f"pathfinder {name} must be a finite number above {low} and at most {REFERENCE_SIZE} (pixels of "
                    f"a 32-px image), got {value!r:.40}"
                )
        if not (is_finite_scalar(self.max_turn) and 0 < self.max_turn <= 180):
            raise ValueError(f"pathfinder max_turn must be a number of degrees in (0, 180], got {self.max_turn!r:.40}")
        if self.thickness > self.separation:
            raise ValueError(
                f"pathfinder thickness {self.thickness} must be at most the separation {self.separation}: thicker "
                "paths would touch their neighbours in every drawing"
            )
        if self.separation * self.scale < self.gap_px:
            raise ValueError(
                f"separation {self.separation} must be at least the dash gap ({self.gap_px} px at {self.size} px), "
                "or most drawings would put two paths within a gap of each other; raise it or lower dash_gap"
            )
        widest = REFERENCE_SIZE - 2 * (self.dot_radius + self.thickness / 2 + 0.5)
        if not (is_finite_scalar(self.dot_distance) and 0 <= self.dot_distance < widest):
            raise ValueError(
                f"pathfinder dot_distance must be a number from 0 to below {widest:g} (pixels of a 32-px image: the "
                f"image's side less the margins), got {self.dot_distance!r:.40}"
            )
        if not isinstance(self.isotropic, bool | np.bool_):
            raise ValueError(f"pathfinder isotropic must be True or False, got {self.isotropic!r:.40}")
        if self.seed_distance <= 2 * self.dot_radius + self.separation:
            raise ValueError("seed_distance must exceed two dot radii plus the separation")


# LRA's 32-px Pathfinder (lra_benchmarks/data/pathfinder.py of google-research/long-range-arena) in the knobs this
# generator shares with it: contour length 14, 20 // (14 // 3) = 5 distractor paths of 14 // 3 = 4 dashes, marker
# radius 1.5 px, seed distance 7 px. Its other settings differ (docs/pathfinder.md names each).
LRA_32 = PathfinderConfig(n_dashes=14, n_distractors=5, distractor_dashes=4, dot_radius=1.5, seed_distance=7.0)

MAX_SIZE = 1024  # a block of 256 images at this side is 256 MB of pixels before the path maps
MAX_BYTES = 1 << 31  # the pixels of one call (n images of size x size)
RENDER_BYTES = 1 << 28  # the stamped pixel coordinates rendered at once (256 MiB)
# (name, least, largest) of the integer knobs; dashes and tries are loops of the generator, bounded like its work
_COUNTS = (
    ("size", REFERENCE_SIZE, MAX_SIZE),
    ("n_dashes", 1, 256),
    ("n_distractors", 0, MAX_PATHS - 2),
    ("distractor_dashes", 1, 256),
    ("tries", 1, 256),
)
_LENGTHS = tuple(
    (name, 0) for name in ("dash_length", "dash_gap", "thickness", "dot_radius", "separation", "seed_distance")
)


@dataclass
class PathfinderImages:
    """``images`` (n, size, size) uint8 (0 or 255), ``labels`` (n,) int64 (1: the dots are on one path),
    ``paths`` (n, size, size) int8 (0 background, 1 the path of the first dot, 2 the other target path, 3... the
    distractors; dot pixels off their path are 0), ``dots`` (n, 2, 2) centres ``x, y`` in pixels at ``size``,
    ``dot_paths`` (n, 2) the path each dot sits on, ``n_distractors`` (n,) the distractors drawn."""

    images: np.ndarray
    labels: np.ndarray
    paths: np.ndarray
    dots: np.ndarray
    dot_paths: np.ndarray
    n_distractors: np.ndarray


def make_pathfinder(
    seed: int, split: str, n: int, cfg: PathfinderConfig = PathfinderConfig(), workers: int = 1
) -> PathfinderImages:
    """The first ``n`` images of ``split`` (``"train"``, ``"val"`` or ``"test"``) for ``seed``; see the module
    docstring. ``workers`` > 1 draws the blocks in that many processes: the same images (each block has its own
    seed), in about ``1 / workers`` of the time."""
    if split not in SPLITS:
        raise ValueError(f"pathfinder split must be one of {list(SPLITS)}, got {split!r:.40}")
    if not (is_integer_scalar(seed) and seed >= 0):
        raise ValueError(f"pathfinder seed must be an integer >= 0, got {seed!r:.40}")
    cfg.check()
    if not (is_integer_scalar(n) and 0 <= n <= MAX_BYTES // cfg.size**2):
        raise ValueError(
            f"pathfinder draws 0 to {MAX_BYTES // cfg.size**2:,} images of {cfg.size} px in one call (2 GiB), got "
            f"n={n!r:.40}"
        )
    if not (is_integer_scalar(workers) and workers >= 1):
        raise ValueError(f"pathfinder workers must be an integer >= 1, got {workers!r:.40}")
    count = -(-max(n, 1) // BLOCK)
    args = ([seed] * count, [SPLITS[split]] * count, range(count), [cfg] * count)
    if workers == 1 or count == 1:
        blocks = list(map(_block, *args))
    else:  # spawned, not forked: the caller may hold threads (torch's) that a fork would copy half-way
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(workers, count), spawn) as pool:
            blocks = list(pool.map(_block, *args))
    return PathfinderImages(*(np.concatenate([getattr(b, f.name) for b in blocks])[:n] for f in fields(blocks[0])))


def _block(seed: int, split: int, block: int, cfg: PathfinderConfig) -> PathfinderImages:
    """Images ``block * BLOCK`` to ``(block + 1) * BLOCK - 1`` of a split, in pairs (image ``2j`` negative, ``2j + 1``
    positive) whose dots are the same distance apart (:func:`_matched_targets`). A pair one of whose images puts two
    paths within ``gap_px`` of each other (Chebyshev, in pixels) is replaced by the next pair of the same stream."""
    rng = np.random.default_rng([seed, split, block, VERSION])
    labels = (np.arange(block * BLOCK, (block + 1) * BLOCK) % 2).astype(np.int64)
    out: PathfinderImages | None = None
    todo = np.arange(BLOCK)
    for _ in range(MAX_ROUNDS):
        images, bad = _render(_draw(rng, labels[todo], cfg), cfg)
        if out is None:
            out = images
        else:
            for f in fields(out):
                getattr(out, f.name)[todo] = getattr(images, f.name)
        pairs = np.unique(todo[bad] // 2)
        todo = np.stack([2 * pairs, 2 * pairs + 1], axis=1).ravel()
        if not len(todo):
            return out
    raise RuntimeError(
        f"pathfinder: drawings keep putting paths within {cfg.gap_px} px of each other; raise separation"
    )


# --- geometry, in reference pixels, vectorised over the m images of a block ---


@dataclass
class _Drawing:
    """Dash starts and directions of every path, (m, paths, dashes, 2) each (NaN where no dash), the labels, the
    two dots' centres (m, 2, 2) and the number of distractors drawn, all in reference pixels."""

    starts: np.ndarray
    dirs: np.ndarray
    labels: np.ndarray
    dots: np.ndarray
    placed: np.ndarray


class _Grid:
    """For each of m images, a grid of ``CELL``-px cells over a square of side ``extent`` (padded by the reach)
    holding one bit per path that has a point within the separation (Chebyshev distance) of the cell."""

    def __init__(
        self, m: int, extent: float, cfg: PathfinderConfig, dtype: type = np.uint64, memory: np.ndarray | None = None
    ) -> None:
        """``memory``: the ``bits`` of an earlier grid, cleared and reused when large enough (a fresh array of tens
        of MiB pays a page fault per page on first touch)."""
        self.reach = math.ceil(cfg.separation / CELL)  # points in cells farther apart are beyond the separation
        self.inner = math.ceil(extent / CELL)
        self.side = self.inner + 2 * self.reach
        self.stride = self.side * self.side + 1  # last cell of a row: a spare one, for points off the grid
        size = m * self.stride
        if memory is not None and memory.dtype == dtype and memory.size >= size:
            self.bits = memory[:size]
            self.bits.fill(0)
        else:
            self.bits = np.zeros(size, dtype=dtype)
        offsets = np.arange(-self.reach, self.reach + 1)
        dy, dx = np.meshgrid(offsets, offsets, indexing="ij")
        self.halo = (dy * self.side + dx).ravel()

    def cells(self, rows: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Index into ``bits`` of points (len(rows), ..., 2); points off the grid go to their row's spare cell."""
        ij = np.floor(np.nan_to_num(points, nan=-1e6) / CELL).astype(np.int64)
        inside = ((ij >= 0) & (ij < self.inner)).all(-1)
        flat = np.where(inside, (ij[..., 1] + self.reach) * self.side + ij[..., 0] + self.reach, self.stride - 1)
        return flat + rows.reshape(-1, *([1] * (flat.ndim - 1))) * self.stride

    def blocked(self, rows: np.ndarray, points: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Whether any of the points (len(rows), ..., k, 2) comes near a path other than ``own`` (bits)."""
        bits = self.bits[self.cells(rows, points)]
        own = own.astype(self.bits.dtype).reshape(-1, *([1] * (bits.ndim - 1)))
        return ((bits & ~own) != 0).any(axis=-1)

    def stamp(self, rows: np.ndarray, points: np.ndarray, bit: np.ndarray, keep: np.ndarray) -> None:
        """Mark the cells near points (len(rows), k, 2) with ``bit`` (len(rows),) where ``keep``."""
        # points closer than a cell share it: each cell once per row (a repeat becomes the row's spare cell, which
        # sorts last), so that the halo is added to the distinct cells only (a dot's 49 points fall in 17)
        cells = np.sort(self.cells(rows, points), axis=1)
        repeat = np.zeros(cells.shape, dtype=bool)
        repeat[:, 1:] = cells[:, 1:] == cells[:, :-1]
        last = cells // self.stride * self.stride + self.stride - 1
        cells = np.sort(np.where(repeat, last, cells), axis=1)[:, : max(1, int((~repeat).sum(1).max(initial=0)))]
        spare = (cells % self.stride) == self.stride - 1
        near = (cells[:, :, None] + np.where(spare, 0, 1)[:, :, None] * self.halo).reshape(
            len(rows), cells.shape[1] * len(self.halo)
        )
        value = np.where(keep, bit.astype(self.bits.dtype), 0).astype(self.bits.dtype)
        # duplicate cells of one row get the same value (old | bit): the fancy assignment is exact
        self.bits[near] = self.bits[near] | value[:, None]
        self.bits[self.stride - 1 :: self.stride] = 0


def _dash_points(starts: np.ndarray, dirs: np.ndarray, cfg: PathfinderConfig) -> np.ndarray:
    """Points (..., k, 2) every ``STEP`` (or closer) along dashes with ``starts`` and ``dirs`` (..., 2)."""
    t = np.linspace(0.0, cfg.dash_length, max(2, math.ceil(cfg.dash_length / STEP) + 1))
    return starts[..., None, :] + t[:, None] * dirs[..., None, :]


def _disc_points(centres: np.ndarray, cfg: PathfinderConfig) -> np.ndarray:
    """Points (m, k, 2) covering discs of ``dot_radius`` around centres (m, 2) every ``STEP``."""
    r = cfg.dot_radius
    axis = np.linspace(-r, r, 2 * math.ceil(r / STEP) + 1)
    dx, dy = np.meshgrid(axis, axis)
    keep = np.hypot(dx, dy) <= r + 1e-9
    return centres[:, None, :] + np.stack([dx[keep], dy[keep]], axis=-1)[None]


def _shift_into_image(rng: np.random.Generator, points: np.ndarray, margin: float) -> np.ndarray:
    """A shift (m, 2) of each set of points (m, k, 2), uniform among those that keep it ``margin`` inside the image;
    NaN where none does (the shape is larger than the image)."""
    lo, hi = np.nanmin(points, axis=1) - margin, np.nanmax(points, axis=1) + margin
    room = REFERENCE_SIZE - (hi - lo)
    shift = -lo + rng.random(lo.shape) * np.maximum(room, 0.0)
    return np.where((room > 0).all(-1, keepdims=True), shift, np.nan)


def _free_walk(rng: np.random.Generator, k: int, n: int, cfg: PathfinderConfig) -> tuple[np.ndarray, np.ndarray]:
    """Dash starts and directions (k, n, 2) of ``k`` walks from the origin, unconstrained."""
    turns = np.deg2rad(rng.uniform(-cfg.max_turn, cfg.max_turn, (k, n - 1)))
    theta = rng.uniform(0.0, 2 * np.pi, (k, 1)) + np.concatenate([np.zeros((k, 1)), np.cumsum(turns, 1)], 1)
    dirs = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    step = dirs[:, :-1] * (cfg.dash_length + cfg.dash_gap)
    starts = np.concatenate([np.zeros((k, 1, 2)), np.cumsum(step, axis=1)], axis=1)
    return starts, dirs


def _draw_targets(rng: np.random.Generator, m: int, cfg: PathfinderConfig) -> dict[str, np.ndarray]:
    """Two target paths for each of ``m`` images, on an open plane. The pair grows dash by dash in turn (each dash
    the first of ``tries`` turns that keeps clear of the other path); a pair that gets stuck, or that would not fit
    the image as drawn (``cfg.isotropic``: turned to every direction, :func:`_width`), is drawn again.
    :func:`_place_pair` places it."""
    n = cfg.n_dashes
    out = {"starts": np.full((m, 2, n, 2), np.nan), "dirs": np.full((m, 2, n, 2), np.nan)}
    todo = np.arange(m)
    extent = 3 * REFERENCE_SIZE  # the plane the pair grows on, its first start in the middle
    edge = cfg.dot_radius + cfg.thickness / 2 + 0.5
    room = REFERENCE_SIZE - 2 * edge  # the widest a placed pair may be
    rate = 0.5  # the share of pairs drawn that succeed, from the last round: draw enough for the images left
    memory = None  # the largest grid's cells so far, reused by the next rounds
    for _ in range(MAX_ROUNDS):
        k = min(math.ceil(1.5 * len(todo) / max(rate, 0.02)), 16 * BLOCK)
        rows = np.arange(k)
        grid = _Grid(k, extent, cfg, np.uint8, memory)
        memory = grid.bits if memory is None or grid.bits.size > memory.size else memory
        bits = [np.full(k, 1, np.uint8), np.full(k, 2, np.uint8)]
        phi = rng.uniform(0.0, 2 * np.pi, k)
        centre = np.full((k, 2), extent / 2)
        pos = np.stack([centre, centre + cfg.seed_distance * np.stack([np.cos(phi), np.sin(phi)], -1)], 1)
        theta = rng.uniform(0.0, 2 * np.pi, (k, 2))
        ok = np.ones(k, dtype=bool)
        for p in range(2):
            grid.stamp(rows, _disc_points(pos[:, p], cfg), bits[p], ok)
        starts = np.full((k, 2, n, 2), np.nan)
        dirs = np.full((k, 2, n, 2), np.nan)
        for j in range(n):
            for p in range(2):
                # every pair draws its turns (the stream stays the same); only the pairs not stuck yet are grown
                turns = np.deg2rad(rng.uniform(-cfg.max_turn, cfg.max_turn, (k, cfg.tries)))
                live = np.flatnonzero(ok)
                angles = theta[live, p, None] + turns[live]
                cand = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
                points = _dash_points(np.broadcast_to(pos[live, p, None], cand.shape), cand, cfg)
                free = ~grid.blocked(live, points, bits[p][live])
                pick, at = free.argmax(axis=1), np.arange(len(live))
                ok[live] = free.any(axis=1)
                points, direction = points[at, pick], cand[at, pick]
                grows = live[ok[live]]  # a pair stuck at this dash marks nothing more
                grid.stamp(grows, points[ok[live]], bits[p][grows], np.ones(len(grows), dtype=bool))
                starts[live, p, j], dirs[live, p, j], theta[live, p] = pos[live, p], direction, angles[at, pick]
                pos[live, p] = points[:, -1] + cfg.dash_gap * direction
        ends = starts[:, :, -1] + cfg.dash_length * dirs[:, :, -1]
        ok &= _clear_of_own_ends(starts, dirs, ends, cfg)
        for p in range(2):  # the end dots keep clear of the other path
            disc = _disc_points(ends[:, p], cfg)
            live = np.flatnonzero(ok)
            ok[live] = ~grid.blocked(live, disc[live, None], bits[p][live])[:, 0]
        dots = np.concatenate([starts[:, :, 0], ends], axis=1)
        lo, hi = _bounds(starts, dirs, dots, cfg)
        lo, hi = lo - edge, hi + edge
        spare = REFERENCE_SIZE - (hi - lo)
        ok &= _width(starts, dirs, dots, cfg) < room if cfg.isotropic else (spare > 0).all(-1)
        # a uniform place as drawn (version 4's stream; the pair's placing moves it again)
        starts = starts + (-lo + rng.random(lo.shape) * np.maximum(spare, 0.0))[:, None, None, :]
        rate = max(ok.mean(), 1e-3)
        good = np.flatnonzero(ok)[: len(todo)]
        for key, value in (("starts", starts), ("dirs", dirs)):
            out[key][todo[: len(good)]] = value[good]
        todo = todo[len(good) :]
        if not len(todo):
            return out
    raise RuntimeError(
        f"pathfinder: two target paths of {cfg.n_dashes} dashes found no room in {MAX_ROUNDS} rounds; "
        "use fewer dashes, a smaller separation or a larger max_turn"
    )


def _clear_of_own_ends(starts: np.ndarray, dirs: np.ndarray, ends: np.ndarray, cfg: PathfinderConfig) -> np.ndarray:
    """Whether each target pair (k, 2, n, 2) keeps every dash of a path, but the two next to an end, at least
    ``dot_radius + separation`` from that end's centre, at both ends of both paths: so a dot on an end has only
    its own first dash within its radius, whichever path and label it marks (version 3 let a path come back near
    its own start: a negative's first path, free to curl, crowded its dot with more pixels than a positive's,
    which must run on to the other dot, and the dots' rendered sizes gave the label 52.6% of the time)."""
    n, least = starts.shape[2], cfg.dot_radius + cfg.separation
    points = _dash_points(starts, dirs, cfg)  # (k, 2, n, s, 2)
    ok = np.ones(len(starts), dtype=bool)
    for centre, dashes in ((starts[:, :, 0], slice(2, n)), (ends, slice(0, max(0, n - 2)))):
        gap = np.linalg.norm(points[:, :, dashes] - centre[:, :, None, None], axis=-1)
        ok &= ~(gap < least).any(axis=(1, 2, 3))  # NaN (a pair stuck) compares False: its own flag says it
    return ok


def _dot_distances(starts: np.ndarray, dirs: np.ndarray, cfg: PathfinderConfig) -> np.ndarray:
    """For target pairs (k, 2, n, 2) whose path 0 carries the first dot (its start): the distance of that dot to
    the end of path 0 (a positive) and to the end of path 1 (a negative), (k, 2)."""
    ends = starts[:, :, -1] + cfg.dash_length * dirs[:, :, -1]
    return np.linalg.norm(ends - starts[:, :1, 0], axis=-1)


def _matched_targets(rng: np.random.Generator, pairs: int, cfg: PathfinderConfig) -> tuple[np.ndarray, np.ndarray]:
    """Target paths (2 pairs, 2, n, 2) for ``pairs`` pairs of images, a negative then a positive, path 0 carrying
    the first dot. Drawn target pairs are taken in order; each offers a positive (its dots on path 0's ends) and a
    negative (path 0's start, path 1's end), each at its dot distance, in bins of :data:`DOT_BIN`. A drawing is
    paired with the first one waiting whose other label falls in the same bin, or waits; the pair is then placed
    together (:func:`_place_pair`) or, where it does not fit, dropped. So the two images of a pair have their dots
    at the same places (to within a bin), positives and negatives have one distribution of dot distance and place,
    and dots closer than two radii and the separation (merged, or nearly), or than ``dot_distance``, are never
    drawn."""
    n = cfg.n_dashes
    out = [np.full((2 * pairs, 2, n, 2), np.nan), np.full((2 * pairs, 2, n, 2), np.nan)]
    least = max(2 * cfg.dot_radius + cfg.separation, cfg.dot_distance)
    drawn: list[np.ndarray] = []  # starts and dirs of every drawing so far, stacked (k, 2, 2, n, 2)
    waiting: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})  # by label: bin -> drawings waiting
    used: set[int] = set()
    done, total = 0, 0
    for _ in range(MAX_ROUNDS):
        k = max(8, 3 * (pairs - done))
        targets = _draw_targets(rng, k, cfg)
        swap = rng.random(k) < 0.5  # which target path carries the first dot
        order = np.stack([swap.astype(int), 1 - swap.astype(int)], axis=1)[:, :, None, None]
        starts = np.take_along_axis(targets["starts"], order, axis=1)
        dirs = np.take_along_axis(targets["dirs"], order, axis=1)
        drawn.append(np.stack([starts, dirs], axis=1))
        every = np.concatenate(drawn)
        dist = _dot_distances(starts, dirs, cfg)
        bins = np.where(dist >= least, dist // DOT_BIN, -1)
        for c in range(k):
            own = total + c
            neg_bin, pos_bin = int(bins[c, 1]), int(bins[c, 0])
            partner, label = _take(waiting[0], pos_bin, used), 1  # a negative waiting at this positive's bin
            if partner is None:
                partner, label = _take(waiting[1], neg_bin, used), 0
            if partner is None:
                for lab, b in ((0, neg_bin), (1, pos_bin)):
                    if b >= 0:
                        waiting[lab].setdefault(b, []).append(own)
                continue
            used.update((own, partner))
            pair = (partner, own) if label == 1 else (own, partner)  # (negative, positive)
            placed = _place_pair(rng, every[list(pair), 0], every[list(pair), 1], cfg)
            if placed is None:  # no direction fits both drawings: the pair is dropped, whichever its labels
                continue
            out[0][2 * done : 2 * done + 2], out[1][2 * done : 2 * done + 2] = placed
            done += 1
            if done == pairs:
                return out[0], out[1]
        total += k
    raise RuntimeError(
        f"pathfinder: {MAX_ROUNDS} rounds drew too few positives and negatives of equal dot distance; "
        "use fewer dashes, a larger max_turn or a smaller dot_distance"
    )


def _place_pair(
    rng: np.random.Generator, starts: np.ndarray, dirs: np.ndarray, cfg: PathfinderConfig
) -> tuple[np.ndarray, np.ndarray] | None:
    """Target paths (2, 2, n, 2) of a negative and a positive (``starts``, ``dirs``, path 0 carrying the first dot)
    placed together, or None where they do not fit. Each drawing is turned rigidly about its first dot so that its
    dot vector points along one direction ``u``, and one translation, uniform among those that keep both turned
    drawings inside the image, puts the first dot of both at one point: the dots of the two images sit at the same
    places, to within the bin of their distance. ``u`` is the first of ``PLACE_TRIES`` drawn directions that fits;
    with ``cfg.isotropic``, one uniform direction, the pair kept only where it fits every direction (its
    :func:`_width`), so that the direction is independent of the drawings. (Without it, long drawings fit along the
    image's diagonals more often; version 4 with the dots at least 13.5 px apart in x or y (``dot_span``, since
    removed) favoured the image axes: the dots' axis lay within 22.5 degrees of one in 76% of the images of
    straighter paths, a straight path carried that direction to its first dot, and a 7-px field read it.)"""
    ends = starts[:, :, -1] + cfg.dash_length * dirs[:, :, -1]
    first = starts[:, 0, 0]  # (2, 2)
    second = np.stack([ends[0, 1], ends[1, 0]])  # the negative's dot on path 1, the positive's on path 0
    alpha = np.arctan2(*(second - first).T[::-1])
    dots = np.concatenate([starts[:, :, 0], ends], axis=1)  # (2, 4, 2): every dot either label may draw
    edge = cfg.dot_radius + cfg.thickness / 2 + 0.5
    phi = rng.uniform(0.0, 2 * np.pi, 1 if cfg.isotropic else PLACE_TRIES)
    every_direction = True
    if cfg.isotropic:  # both drawings laid as one, dot vectors along +x: it fits every direction, or none is taken
        turn = _rotations(-alpha)
        laid = (
            np.einsum("iab,i...b->i...a", turn, x).reshape(1, -1, *x.shape[2:])
            for x in (starts - first[:, None, None], dirs)
        )
        laid_dots = np.einsum("iab,ikb->ika", turn, dots - first[:, None]).reshape(1, -1, 2)
        every_direction = bool(_width(*laid, laid_dots, cfg)[0] < REFERENCE_SIZE - 2 * edge)
    discs = np.stack([_disc_points(d, cfg).reshape(-1, 2) for d in dots])
    points = np.concatenate([_dash_points(starts, dirs, cfg).reshape(2, -1, 2), discs], axis=1) - first[:, None]
    rot = _rotations(phi[:, None] - alpha[None])  # (tries, 2, 2, 2): each drawing's turn
    turned = np.einsum("tiab,ikb->tika", rot, points)  # (tries, 2 images, k, 2)
    lo = (edge - turned.min(axis=2)).max(axis=1)  # (tries, 2): the first dot's least place fitting both
    hi = (REFERENCE_SIZE - edge - turned.max(axis=2)).min(axis=1)
    fits = (hi > lo).all(-1) & every_direction
    at = rng.random(2)  # drawn whether or not a direction fits: the stream does not depend on the fit
    if not fits.any():
        return None
    t = int(fits.argmax())
    place = lo[t] + at * (hi[t] - lo[t])
    new_dirs = np.einsum("iab,ipdb->ipda", rot[t], dirs)
    new_starts = place + np.einsum("iab,ipdb->ipda", rot[t], starts - first[:, None, None])
    return new_starts, new_dirs


def _bounds(
    starts: np.ndarray, dirs: np.ndarray, dots: np.ndarray, cfg: PathfinderConfig
) -> tuple[np.ndarray, np.ndarray]:
    """The least and largest x and y (..., 2) of drawings (paths (..., p, n, 2), dots (..., d, 2)) as drawn: their
    dashes' ends and the dots' discs."""
    lead = starts.shape[:-3]
    dashes = np.concatenate([starts, starts + cfg.dash_length * dirs], axis=-2).reshape(*lead, -1, 2)
    lo = np.minimum(np.nanmin(dashes, axis=-2), (dots - cfg.dot_radius).min(axis=-2))
    hi = np.maximum(np.nanmax(dashes, axis=-2), (dots + cfg.dot_radius).max(axis=-2))
    return lo, hi


def _width(starts: np.ndarray, dirs: np.ndarray, dots: np.ndarray, cfg: PathfinderConfig) -> np.ndarray:
    """The widest, in any direction, of drawings (paths (..., p, n, 2), dots (..., d, 2)): the largest
    distance between two of their dashes' ends, or to a dot's centre plus its radius, or between two dots plus both
    radii (the ends of a dash bound its points, a dot's centre its disc). Turned to any direction a drawing fits a
    square of that side, and to some direction no smaller one: where it fits the image, every direction does."""
    lead = starts.shape[:-3]
    ends = (starts + cfg.dash_length * dirs).reshape(*lead, -1, 2)
    dashes = np.concatenate([starts.reshape(*lead, -1, 2), ends], axis=-2)

    def farthest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        square = (a * a).sum(-1)[..., :, None] + (b * b).sum(-1)[..., None, :] - 2 * a @ np.swapaxes(b, -1, -2)
        return np.sqrt(np.maximum(square.max(axis=(-2, -1)), 0.0))

    r = cfg.dot_radius
    return np.maximum(np.maximum(farthest(dashes, dashes), farthest(dashes, dots) + r), farthest(dots, dots) + 2 * r)


def _rotations(angles: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 2, 2) by ``angles`` (...) radians."""
    c, s = np.cos(angles), np.sin(angles)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def _take(waiting: dict[int, list[int]], b: int, used: set[int]) -> int | None:
    """The first drawing waiting in bin ``b`` that is not used yet (removed from the queue), or None."""
    queue = waiting.get(b, [])
    while queue:
        c = queue.pop(0)
        if c not in used:
            return c
    return None


def _draw(rng: np.random.Generator, labels: np.ndarray, cfg: PathfinderConfig) -> _Drawing:
    """Drawings of images with the given labels (m,): pairs ``(0, 1)``, each at one dot distance."""
    m, n = len(labels), cfg.n_dashes
    rows = np.arange(m)
    t_starts, t_dirs = _matched_targets(rng, m // 2, cfg)
    t_ends = t_starts[:, :, -1] + cfg.dash_length * t_dirs[:, :, -1]
    dots = np.stack([t_starts[:, 0, 0], np.where(labels[:, None] == 1, t_ends[:, 0], t_ends[:, 1])], axis=1)
    grid = _Grid(m, REFERENCE_SIZE, cfg)
    for p in range(2):
        points = _dash_points(t_starts[:, p], t_dirs[:, p], cfg).reshape(m, -1, 2)
        discs = np.concatenate([_disc_points(t_starts[:, p, 0], cfg), _disc_points(t_ends[:, p], cfg)], axis=1)
        grid.stamp(rows, np.concatenate([points, discs], axis=1), np.full(m, 1 << p, np.uint64), np.ones(m, bool))
    nd, d = cfg.n_distractors, cfg.distractor_dashes
    width = max(n, d)
    starts = np.full((m, 2 + nd, width, 2), np.nan)
    dirs = np.full((m, 2 + nd, width, 2), np.nan)
    starts[:, :2, :n], dirs[:, :2, :n] = t_starts, t_dirs
    placed = np.zeros(m, dtype=np.int64)
    edge = cfg.thickness / 2 + 0.5
    tries = 4 * cfg.tries
    for q in range(nd):  # each distractor: the first of `tries` shapes and places that is clear of the paths
        own = np.full(m * tries, np.uint64(1) << np.uint64(2 + q))
        walk_starts, walk_dirs = _free_walk(rng, m * tries, d, cfg)
        points = _dash_points(walk_starts, walk_dirs, cfg).reshape(m * tries, -1, 2)
        shift = _shift_into_image(rng, points, edge)
        points = points + shift[:, None, :]
        ok = ~np.isnan(shift).any(-1) & ~grid.blocked(np.repeat(rows, tries), points, own)
        ok = ok.reshape(m, tries)
        pick = rows * tries + ok.argmax(axis=1)
        found = ok.any(axis=1)
        grid.stamp(rows, points[pick], own[:m], found)
        starts[found, 2 + q, :d] = (walk_starts + shift[:, None, :])[pick][found]
        dirs[found, 2 + q, :d] = walk_dirs[pick][found]
        placed += found
    return _Drawing(starts, dirs, labels, dots, placed)


# --- rendering at the output size ---


def _render(drawing: _Drawing, cfg: PathfinderConfig) -> tuple[PathfinderImages, np.ndarray]:
    """Binary images, path maps and dot positions at ``cfg.size`` of the drawings, and which images put pixels of
    two paths (a dot counted with its path) at Chebyshev distance ``gap_px`` or less. Each image is rendered on its
    own, so the images go in groups whose stamped pixels stay within :data:`RENDER_BYTES` (a block at 1,024 px
    needed 10 GiB at once); the groups change nothing of the images."""
    m, n_paths, n_dashes = drawing.starts.shape[:3]
    stamped = n_paths * n_dashes * _dash_samples(cfg) * cfg.width_px**2 * 2 * 8  # int64 pixel pairs per image
    group = max(1, RENDER_BYTES // stamped)
    if group >= m:
        return _render_group(drawing, cfg)
    parts = [
        _render_group(_Drawing(*(getattr(drawing, f.name)[i : i + group] for f in fields(drawing))), cfg)
        for i in range(0, m, group)
    ]
    images = PathfinderImages(*(np.concatenate([getattr(p, f.name) for p, _ in parts]) for f in fields(parts[0][0])))
    return images, np.concatenate([bad for _, bad in parts])


def _dash_samples(cfg: PathfinderConfig) -> int:
    """Points sampled along a dash at ``cfg.size``, half a pixel apart."""
    return max(2, math.ceil(cfg.dash_length * cfg.scale / 0.5) + 1)


def _render_group(drawing: _Drawing, cfg: PathfinderConfig) -> tuple[PathfinderImages, np.ndarray]:
    size, s = cfg.size, cfg.scale
    m, n_paths = drawing.starts.shape[:2]
    t = np.linspace(0.0, cfg.dash_length * s, _dash_samples(cfg))
    points = drawing.starts[..., None, :] * s + t[:, None] * drawing.dirs[..., None, :]  # (m, P, D, k, 2)
    pix = np.floor(np.nan_to_num(points, nan=-1e6)).astype(np.int64)
    w = cfg.width_px
    lo = -((w - 1) // 2)
    block = np.stack(np.meshgrid(np.arange(lo, lo + w), np.arange(lo, lo + w)), axis=-1).reshape(-1, 2)
    pix = pix.reshape(m, n_paths, -1, 1, 2) + block[None, None, None]
    pix = pix.reshape(m, n_paths, -1, 2)
    spare = size * size
    inside = ((pix >= 0) & (pix < size)).all(-1)
    flat = np.where(inside, pix[..., 1] * size + pix[..., 0], spare)
    owner = np.zeros((m, spare + 1), dtype=np.int8)
    for p in range(n_paths):
        np.put_along_axis(owner, flat[:, p], np.int8(p + 1), axis=1)
    owner[:, spare] = 0
    lit = owner > 0
    members = owner.copy()  # the paths' ids, with each dot given its path's
    dot_paths = np.stack([np.ones(m, np.int64), np.where(drawing.labels == 1, 1, 2)], axis=1)
    dots = drawing.dots * s
    radius = cfg.dot_radius * s
    reach = math.ceil(radius) + 1
    dy, dx = np.meshgrid(np.arange(-reach, reach + 1), np.arange(-reach, reach + 1), indexing="ij")
    for j in range(2):
        base = np.floor(dots[:, j]).astype(np.int64)
        px, py = base[:, 0, None, None] + dx, base[:, 1, None, None] + dy
        near = ((px + 0.5 - dots[:, j, 0, None, None]) ** 2 + (py + 0.5 - dots[:, j, 1, None, None]) ** 2) <= radius**2
        near |= (dx == 0) & (dy == 0)
        ok = near & (px >= 0) & (px < size) & (py >= 0) & (py < size)
        flat_dot = np.where(ok, py * size + px, spare).reshape(m, -1)
        np.put_along_axis(lit, flat_dot, True, axis=1)
        np.put_along_axis(members, flat_dot, dot_paths[:, j : j + 1].astype(np.int8), axis=1)
    images = np.where(lit[:, :spare], 255, 0).astype(np.uint8).reshape(m, size, size)
    paths = owner[:, :spare].reshape(m, size, size)
    return PathfinderImages(images, drawing.labels, paths, dots, dot_paths, drawing.placed), _too_close(
        members[:, :spare].reshape(m, size, size), cfg.gap_px
    )


def _too_close(members: np.ndarray, gap: int) -> np.ndarray:
    """Whether two different non-zero ids of (m, h, w) maps lie at Chebyshev distance ``gap`` or less: some
    window of ``gap + 1`` pixels a side holds both."""
    big = np.iinfo(np.int8).max
    hi = members.copy()
    lo = np.where(members > 0, members, big).astype(np.int8)
    for axis in (1, 2):
        hi_src, lo_src = hi.copy(), lo.copy()
        for d in range(1, gap + 1):
            lead = [slice(None)] * 3
            lag = [slice(None)] * 3
            lead[axis], lag[axis] = slice(None, -d), slice(d, None)
            hi[tuple(lead)] = np.maximum(hi[tuple(lead)], hi_src[tuple(lag)])
            lo[tuple(lead)] = np.minimum(lo[tuple(lead)], lo_src[tuple(lag)])
    return ((hi > 0) & (lo < big) & (hi != lo)).any(axis=(1, 2))


def dot_geometry(drawn: PathfinderImages, cfg: PathfinderConfig) -> np.ndarray:
    """The cues of the two dots alone, one row per image (n, 9): their distance, ``|dx|``, ``|dy|``, each dot's
    centre (x, y) and each dot's lit pixels within one pixel beyond its radius (its rendered size, which a merged or
    crowded dot changes); in pixels at ``cfg.size``, the size of ``drawn``. A classifier on these that beats chance
    is a shortcut."""
    dots = drawn.dots
    delta = np.abs(dots[:, 0] - dots[:, 1])
    yy, xx = np.mgrid[: cfg.size, : cfg.size] + 0.5
    reach = (cfg.dot_radius * cfg.scale + 1.0) ** 2
    lit = drawn.images > 0
    blobs = [
        (lit & ((xx - dots[:, j, 0, None, None]) ** 2 + (yy - dots[:, j, 1, None, None]) ** 2 <= reach)).sum((1, 2))
        for j in range(2)
    ]
    return np.column_stack([np.hypot(delta[:, 0], delta[:, 1]), delta, dots.reshape(len(dots), 4), *blobs])
