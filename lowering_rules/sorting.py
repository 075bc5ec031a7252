"""(rules in progress)"""
