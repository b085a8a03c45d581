"""Making OPIS cases: annotation, the VLM-driven build, COCO import, sourcing images, cases from videos."""
