"""Design-space exploration: `modelcircuit sweep` / `mc.sweep` (optional extra [sweep]).

The package is not named `sweep` so that `mc.sweep` stays the API's function. Ray and
matplotlib are imported lazily, only when a sweep runs."""
