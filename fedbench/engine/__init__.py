"""The engine: federated data on the device, stacked client weights, vectorised training and evaluation."""
