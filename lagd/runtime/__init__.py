"""The daemon loop's runtime helpers: its clock, the turns requests take before background
work, slices of long answers, the loop's lag, the garbage collector's pacing, backoff,
systemd notification, logging and the switch to the compiled code.
"""
