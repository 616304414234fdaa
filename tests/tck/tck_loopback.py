"""pytest plugin for the A2A TCK (``-p tck_loopback``): its webhook receiver listens on
127.0.0.1 instead of 0.0.0.0, so nothing of the run is reachable beyond loopback."""

from tck.webhook.server import WebhookReceiver

WebhookReceiver.__init__.__defaults__ = ("127.0.0.1",)
