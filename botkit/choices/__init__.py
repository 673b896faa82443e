"""Each conversation's own assistant: the models and personas users pick (``/model``,
``/persona``) and their standing instructions (``/instructions``), within what the operator
offers (BOTKIT_MODELS, BOTKIT_PERSONAS_DIR) and their plan unlocks.

Kept light: ``botkit.options`` imports the texts from here, so the service
(``botkit.choices.service``) is imported by the features, not by this package.
"""

from botkit.choices.personas import Persona, load_personas
from botkit.choices.texts import ChoiceTexts

__all__ = ["ChoiceTexts", "Persona", "load_personas"]
