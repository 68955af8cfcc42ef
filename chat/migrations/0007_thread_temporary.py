# Temporary chats (issue 55): Thread.temporary and the reaper's partial index.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0006_default_model'),
    ]

    operations = [
        migrations.AddField(
            model_name='thread',
            name='temporary',
            field=models.BooleanField(default=False),
        ),
        migrations.AddIndex(
            model_name='thread',
            index=models.Index(condition=models.Q(('temporary', True)), fields=['updated_at'], name='thread_temporary_recent'),
        ),
    ]
