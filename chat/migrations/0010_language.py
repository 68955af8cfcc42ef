# Translations (issue 55): UserPreferences.language, the person's language over the browser's.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0009_artifacts'),
    ]

    operations = [
        migrations.AddField(
            model_name='userpreferences',
            name='language',
            field=models.CharField(blank=True, max_length=16),
        ),
    ]
