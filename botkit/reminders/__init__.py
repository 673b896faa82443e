"""Reminders and scheduled tasks that fire exactly once, in the chat they were asked in.

- ``times``: ``when`` and ``repeat`` as the model writes them; time zones.
- ``service``: :class:`Reminders`, a bot's schedules in its user store.
- ``tools``: the model's tools (``remind``, ``schedule_task``, ``list_scheduled``,
  ``cancel_scheduled``, ``set_timezone``) and the plugin that offers them.
- ``commands``: ``/timezone`` and ``/scheduled`` (with cancel buttons).
- ``firing``: claim, deliver, record: :func:`fire_due_schedules` for any runtime, and the
  loop the single-process runtime runs.
- ``listing``: ``python -m botkit scheduled`` for operators.
"""
