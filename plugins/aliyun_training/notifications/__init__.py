"""Notifications: a pipeline's declared notifiers (DingTalk, Slack, e-mail or a notifier class of
its own) and the notices sent to them, one per change of state of a run.

Importing this package imports no provider and no HTTP client: a notifier's class is imported when
a notice is sent. ``notifications.dingtalk`` holds ``DingTalkNotifier``.
"""

from aliyun_training.notifications.declared import NotifierSetupError, NotifierSpec
from aliyun_training.notifications.events import Notice, NotifyEvent
from aliyun_training.notifications.sending import asend_notice, send_notice

__all__ = ["Notice", "NotifierSetupError", "NotifierSpec", "NotifyEvent", "asend_notice", "send_notice"]
