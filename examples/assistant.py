"""The README's example: an assistant that keeps notes for each user."""

from botkit import Bot, Incoming, ToolContext, tool

NOTES: dict[int, list[str]] = {}


@tool
async def remember(ctx: ToolContext, note: str) -> str:
    """Write down a note for this user.

    Args:
        note: What to remember, in one sentence.
    """
    NOTES.setdefault(ctx.user_id, []).append(note)
    return f"Noted ({len(NOTES[ctx.user_id])} notes so far)."


class NoteBot(Bot):
    async def build_prompt(self, message: Incoming) -> str:
        notes = "; ".join(NOTES.get(message.user_id, [])) or "none yet"
        return f"You are a concise assistant. The user's notes: {notes}."


bot = NoteBot(tools=[remember])
