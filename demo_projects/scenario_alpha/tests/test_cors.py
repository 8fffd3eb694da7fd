from webapp.cors import cors_headers, is_origin_allowed
from webapp.settings import allowed_origins

ENV = {"ALLOWED_ORIGINS": "https://app.example.com, https://admin.example.com"}


def test_allowed_origins_are_parsed_without_surrounding_spaces():
    assert allowed_origins(ENV) == ["https://app.example.com", "https://admin.example.com"]


def test_second_configured_origin_is_allowed():
    assert is_origin_allowed("https://admin.example.com", ENV)


def test_blank_entries_are_ignored():
    env = {"ALLOWED_ORIGINS": "https://app.example.com, ,https://admin.example.com, "}
    assert allowed_origins(env) == ["https://app.example.com", "https://admin.example.com"]


def test_cors_headers_echo_the_second_origin():
    assert cors_headers("https://admin.example.com", ENV) == {
        "Access-Control-Allow-Origin": "https://admin.example.com",
        "Vary": "Origin",
    }
