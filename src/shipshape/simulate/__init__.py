"""What-if simulation: emulator models in discrete-event mode with the controller's placement."""
