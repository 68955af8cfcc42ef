from django.urls import path

from .consumers import InboxConsumer, ThreadConsumer

websocket_urlpatterns = [
    path("ws/threads/<str:thread_id>/", ThreadConsumer.as_asgi()),
    path("ws/approvals/", InboxConsumer.as_asgi()),
]
