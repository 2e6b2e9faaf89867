"""Celery workers: `iclaudit worker` runs `celery -A workers.celery_app worker --pool=solo`."""
