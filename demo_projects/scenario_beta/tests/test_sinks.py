from auditlog.sinks import configured_sinks, normalize_sink_name, unknown_sinks

ENV = {"AUDIT_SINKS": "Audit-Log, Metrics"}


def test_sink_name_is_normalised_to_an_identifier():
    assert normalize_sink_name(" Audit-Log ") == "audit_log"


def test_configured_sinks_are_trimmed_and_lowercased():
    assert configured_sinks(ENV) == ["audit_log", "metrics"]


def test_known_sinks_are_not_reported_unknown():
    assert unknown_sinks(ENV) == []


def test_blank_entries_are_ignored():
    assert configured_sinks({"AUDIT_SINKS": "Audit-Log, ,SIEM-Export, "}) == ["audit_log", "siem_export"]
