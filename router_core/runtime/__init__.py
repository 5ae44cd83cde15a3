"""What the gateway imports to route a request: the runtime ``Router`` (router), the
decision rule and its record (decision), how far a decision is from flipping (margin).
numpy only; the promise rule is router_core.promise.rule, inside its package.
"""
