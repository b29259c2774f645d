"""Great Expectations gates between the layers: suites as code (:mod:`.suites`), the gate's
bookkeeping without Spark (:mod:`.state`) and the gate job itself (:mod:`.gate`)."""
