"""Helpers the tests share: imported from here, never copied between test files."""
