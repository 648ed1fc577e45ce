"""Energy where people train and track: callbacks for training loops that measure every optimizer
step and evaluation (``transformers.EnergyCallback``, ``lightning.EnergyCallback``), built on
``steps.TrainingMeter``. Each module imports its framework; docs/integrations.md."""
