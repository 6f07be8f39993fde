"""Moving records between targets and stores: ``migrate`` (a body of results re-tuned on another
target, ``tunedb migrate``), ``copy`` (records copied unchanged between any two stores, ``tunedb
copy``) and ``publish`` (a read-only snapshot for a static web server, ``tunedb publish``).
Where measurements run (here, or on Ray) is ``tunedb.transfer.measure.executors``."""
