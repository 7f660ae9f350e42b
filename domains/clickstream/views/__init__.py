"""The clickstream's views, one module each, declaring ``VIEW``."""
