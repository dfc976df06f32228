"""The one error the agent reports as is (message, next step, a code the laptop keys on)."""


class AgentError(Exception):
    """An error the client shows as is: message and next step."""

    def __init__(self, message: str, remedy: str = "", code: str = "error") -> None:
        super().__init__(message)
        self.message, self.remedy, self.code = message, remedy, code
