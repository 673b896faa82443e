"""Recorded sessions as regression tests: each user turn run again through a bot, compared.

``python -m botkit replay SESSION --rerun`` and ``botkit.testing.rerun`` call
:func:`rerun_session`; the turn itself runs in the bot's own ``TurnPipeline``
(``TurnPipeline.rerun_turn``) on a scratch store, with a messenger that sends nothing.
"""

from botkit.rerun.compare import RerunReport, TurnReport
from botkit.rerun.playback import PlaybackMismatch, RecordedLLM
from botkit.rerun.runner import LLMMode, rerun_session

__all__ = [
    "LLMMode",
    "PlaybackMismatch",
    "RecordedLLM",
    "RerunReport",
    "TurnReport",
    "rerun_session",
]
