"""Notifications: hookd telling a person when something needs one.

- ``message``: what a notification says (one alert kind, one or more of its alerts).
- ``channels``: where it goes (``[[notify]]``: Slack, email, a signed webhook,
  PagerDuty), each sent through the destinations' delivery rules.
- ``render``: what each kind of channel is sent for a message (pure).
"""
