"""The plain data every part of lagd shares: the domain types (model), the settings
(config), times, and the rule set chosen from them (ruleset). No I/O.
"""
