"""What every backend shares: the problem (:mod:`.problem`), geometries (:mod:`.geometry`), Butcher
tables (:mod:`.tableau`), Brownian increments (:mod:`.brownian`), input checks and the step grid
(:mod:`.base`) and the solution every ``solve`` returns (:mod:`.solution`)."""
