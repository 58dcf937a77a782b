"""The job page: one page that shows a job's recommendation, plots and trials.

The same page serves two faces. The REST service serves it live (its script reads the job
through the ``/v1`` API and polls while the job runs); ``autotune report`` writes it as one
self-contained HTML file, the job's data and every script inlined, that opens offline.
"""

from autotune.report._assets import Asset, asset, asset_names
from autotune.report._data import job_page_data
from autotune.report._page import View, report_page, service_page, write_report

__all__ = [
    "Asset",
    "View",
    "asset",
    "asset_names",
    "job_page_data",
    "report_page",
    "service_page",
    "write_report",
]
