"""Continuous weight symmetries of PDE-ResNet (Liu et al., "A Novel Convolutional Neural Network Architecture
with a Continuous Symmetry", arXiv:2308.01621): fold, transform, check, sparsify.

Layout: NCHW; a group element ``g`` (``n x n``) acts on the channels of a stage's residual stream, ``u -> g u``.

**Setting.** After :func:`fold_batchnorm` (eval mode) every block reads ``u_out = act(S u + c + A h(u))``
with 3x3 derivative kernels ``K`` and 1x1 matrices ``W`` (inside ``h``), ``A``, ``S`` only
(:mod:`pdevision.layers.hyperbolic`). A stage's stream starts after the activation of its downsampling block
and ends where the next stage's downsampling block (or the pooled linear head) reads it. Changing its basis
by ``g`` and compensating the maps that write it (``A -> g A``, ``S -> g S``, ``c -> g c``) and that read it
(``S -> S g^-1``, ``W -> W g^-1``, the head ``fc -> fc g^-1``) keeps the function exactly when

1. the activation commutes with ``g``: hardball/softball (radial, fixed radius ``sqrt(n)``) with O(n) only,
   hardtanh (entry-wise clip) with signed permutations, ReLU with permutations times positive scalings,
   no activation with GL(n); and
2. the block's nonlinear part can absorb ``g``. In this library's ``mix`` / ``mix_cons`` blocks the stream is
   read only by the 1x1 conv ``W`` (the derivatives act on ``W u``), so any invertible ``g`` is absorbed. In every
   equation of the paper (Eqs. (3)-(7), :mod:`pdevision.layers.hyperbolic`) and in ``coef_grad`` some product
   takes the stream entry by entry (Eq. 3: ``(C u)_j du_j``; Eq. 4: the output ``(C u)_i (A du)_i``; Eq. 5:
   ``(C u)_i du_i``; Eqs. 6-7: ``u_j (C u)_j``), and such a product keeps its form under ``u -> g u`` only if
   ``g`` is monomial: ``(g u)_i = d_i u_pi(i)`` (permute the channels, divide the coefficient rows by ``d_i``).
   A depthwise derivative conv commutes with a dense ``g`` only when all channels share one kernel, but the
   entry-wise product already rules a dense ``g`` out; per-channel kernels are permuted along with the
   channels, so **weight sharing does not change any group** below.

The group acting on every stage's stream, :func:`stage_groups`:

=========================== ====================== ================================================
 stage activation            mix, mix_cons           eq3 ... eq7 (the paper), coef_grad
=========================== ====================== ================================================
 none                        GL(n)                   monomial: permutations x scalings (continuous)
 hardball, softball          O(n)                    signed permutations (finite)
 hardtanh                    signed permutations     signed permutations
 relu, relu@all              perm x diag>0           perm x diag>0 (continuous positive scalings)
=========================== ====================== ================================================

So the paper's models as trained in Table 1 (softball/hardball/hardtanh at downsampling) have only the finite
group of signed permutations (S_n with signs) on their streams; relu@all and activation-free stages add
continuous scalings; the continuous O(n) / GL(n) symmetry needs the derivative taken of a mixed variable
(``pderesnet50_mix``, ``pderesnet50_mix_cons``, not equations of the paper). The tests check each entry:
random elements (condition number up to 10) leave the logits unchanged to 1e-4 relative where
:func:`transform` is implemented (eq3, eq4, eq6, eq7 and the library variants; for eq5 it raises
``NotImplementedError`` and the entry is derived, not checked numerically), and an element of a larger group
changes them. In eq5 the branch of a widening block writes the first
``n_in`` output channels with the input channel's index (zero padding), so there the permutations of
consecutive stages are coupled (the next stage's first ``n_in`` channels must be permuted like the previous
stage's); scalings stay independent.

The head's pre-logit features change by ``g``; the logits do not. Symmetries inside the blocks' hidden
channels (e.g. scaling ``C u`` against ``D u``) are not used here.

Functions: :func:`fold_batchnorm`, :func:`stage_groups`, :func:`random_element`, :func:`transform`,
:func:`check_invariance`, :func:`sparsify` (gradient descent over the group for sparser 1x1 weights),
:func:`prune_small_weights`.
"""

from pdevision.symmetry.fold import fold_batchnorm
from pdevision.symmetry.groups import (
    ACTIVATION_GROUP,
    GROUPS,
    form_group,
    intersect,
    is_member,
    monomial_parts,
    random_element,
    random_group_element,
    stage_dims,
    stage_groups,
)
from pdevision.symmetry.sparsify import (
    SparsifyResult,
    fraction_below,
    one_by_one_weights,
    prune_small_weights,
    sparsify,
)
from pdevision.symmetry.transform import BlockMatrices, act_on_block, check_invariance, stream_blocks, transform

__all__ = [
    "ACTIVATION_GROUP",
    "GROUPS",
    "BlockMatrices",
    "SparsifyResult",
    "act_on_block",
    "check_invariance",
    "fold_batchnorm",
    "form_group",
    "fraction_below",
    "intersect",
    "is_member",
    "monomial_parts",
    "one_by_one_weights",
    "prune_small_weights",
    "random_element",
    "random_group_element",
    "sparsify",
    "stage_dims",
    "stage_groups",
    "stream_blocks",
    "transform",
]
