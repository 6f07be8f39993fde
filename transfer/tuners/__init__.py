"""One folder per outside tuner: everything tunedb needs to work with it."""
