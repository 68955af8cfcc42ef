"""Policy simulation, drafts, four-eyes approval and versions of the tool policies and
approval rules (issue 57; DESIGN §4 "Policy simulation")."""
