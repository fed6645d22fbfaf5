"""Human review of a sample of a run's objects (SPEC 6.12).

* :mod:`evalcore.review.sample`: the objects, the cells, the allocation and the draw;
* :mod:`evalcore.review.page`: the offline review page (``review/index.html``);
* :mod:`evalcore.review.decisions`: reading and checking decisions and adjudications;
* :mod:`evalcore.review.statistics`: completion, the weighted confirmed share with its
  Wilson interval, severe-error prevalence, Cohen's and Fleiss' kappa;
* :mod:`evalcore.review.store`: the files in the run directory and their evidence;
* :mod:`evalcore.review.layout`: where those files live (read by the gates and the report).

No logic here: import from the modules.
"""

__all__: list[str] = []
