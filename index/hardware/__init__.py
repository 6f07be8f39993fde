"""The hardware side: the device catalog, local CPU presets and target resolution."""
