"""A user's data: erased (``users forget``, GDPR art. 17) and exported (``users export``, art. 15).

What botkit holds about a user is split into parts (``botkit.privacy.parts``): sessions,
memory, the user store's records, the inbox journal. A feature keeping more adds a part.
"""

from botkit.privacy.defaults import default_parts
from botkit.privacy.erase import export_user, forget_user
from botkit.privacy.parts import Part

__all__ = ["Part", "default_parts", "export_user", "forget_user"]
