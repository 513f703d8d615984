"""Layer 2, the training engine: federated data on the device, stacked client weights, vectorised training and evaluation."""
