"""The ads domain's views, one module each, declaring ``VIEW``."""
