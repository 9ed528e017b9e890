"""Explanation-guided operator fusion (GET: Mills et al., "Applying Graph Explanation to Operator
Fusion", arXiv 2501.00636): partition plans of an inference graph into fusion groups under an on-chip
buffer, searched with random search, local search or NSGA-II, invalid groups split where an explainer
of a GNN validity classifier points.

* ``problem`` -- the plan model: F_D (DRAM traffic), F_beta (LBDF, BRR), memoised per group;
* ``split`` -- explanation edges -> cuts by topological position -> the greedy tree split (Alg. 1);
* ``gnn`` / ``explain`` -- the k-GNN validity classifier, GNNExplainer, gradient saliency, oracle;
* ``search`` -- the plan searches with a plan budget; ``fuse`` -- all of it, and the plan file (with
  the tree-split steps behind the plan's groups, ``HOW`` each chose its parts).
"""

from .fuse import SPLITTERS, FusionPlan, fuse
from .problem import SCHEMES, FusionError, FusionProblem, check_plan
from .search import SEARCHES
from .split import HOW

__all__ = ["HOW", "SCHEMES", "SEARCHES", "SPLITTERS", "FusionError", "FusionPlan", "FusionProblem", "check_plan", "fuse"]
